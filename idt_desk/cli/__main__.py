"""``python -m idt_desk.cli``: the ``idt-desk`` command without its console script."""

import sys

from idt_desk.cli.main import main

sys.exit(main())
