"""What each notebook runs: parameter schemas and the functions its cells call."""
