"""A rank process's side of the port (port/schema.py): built from the plain data the host sends
(main.py), its system calls, scheduler, machine and torch.distributed world are clients of the
port (client.py, dist.py, nativecalls.py); it imports nothing of the kernel (runtime/)."""
