"""The `gspo-trl` command: one module per subcommand (arguments and printing only)."""
