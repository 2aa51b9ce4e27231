"""Pure ledger logic: no git, subprocess or network here."""
