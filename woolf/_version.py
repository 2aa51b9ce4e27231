"""The package version, in one place (pyproject reads it; `woolf --version` prints it).

Usage:
    from woolf._version import __version__
"""

__version__ = "0.1.0"
