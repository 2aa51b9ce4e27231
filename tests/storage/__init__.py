"""Tests of woolf/storage/: safetensors files, bounded reads, DVC objects, S3."""
