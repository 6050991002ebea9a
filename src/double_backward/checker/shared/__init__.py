"""What the two checkers share: the report, central differences and the fixes for built-ins."""
