"""Data IDT Desk runs on, installed as the package ``idt_desk_assets``.

Trained policies (``policies/``: SB3 zips and their model cards), the shipped dialogue recording
(``recordings/``) and the paper's sample pendulum trajectory (``data/``). Code finds them with
:func:`idt_desk.assets.path`, so an installed wheel finds the same files as a source checkout.
"""
