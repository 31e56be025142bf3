"""IDT Desk test suite."""
