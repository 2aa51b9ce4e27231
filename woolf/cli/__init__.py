"""Layer 9: the `woolf` command line. Each command parses, calls one library function, prints.

Usage:
    woolf --help
"""
