"""Git, DVC and safetensors access."""
