"""Commands that run a whole network or describe one: demo, report."""

COMMANDS: list = []
