"""torch.distributed's own c10d inside rank processes, on simulated parts: process groups whose
collectives meet in the host's scheduler (group.py, functional.py), stores and rendezvous
(store.py), and their installation in a rank process (install.py). Imported only where torch is."""
