"""Data-source plugins (Qt-free), discovered through the idt_desk.sources entry points."""
