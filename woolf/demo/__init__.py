"""Layer 8: a whole training network on one machine: hub, participant and validator processes,
adversaries, the live view, and the reference runs every demo is judged against.

Usage:
    from woolf.demo.run import run_demo
"""
