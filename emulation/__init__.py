"""The emulation: real networks in Mininet, steered by the testbed's controller.

- ``emulation.net``: ``EmulatedNetwork`` (the one module importing Mininet) and ``clean()``.
- ``emulation.netstate``: what a run created, recorded on disk so leftovers can be removed.
- ``emulation.run``: ``python -m emulation.run``, the command that runs schedules end to end.

Nothing is imported here, so ``import emulation`` needs neither Mininet nor root.
"""
