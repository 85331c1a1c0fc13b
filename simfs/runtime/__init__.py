"""The kernel of one run: the scheduler, the simulated machine (faults, trace, costs, locks,
crashes), system calls, simulated torch.distributed and stores, the handlers of the port's
requests and the carriers of the ranks (carrier/). A rank's side is simfs/rank/."""
