"""A whole training network on one machine: hub, participant and validator processes."""
