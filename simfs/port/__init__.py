"""The port between a rank and the simulated kernel: every request a rank makes and every answer
it gets, declared once (schema.py), and how they cross a socket (framing.py). Greenlet ranks hand
the requests to the kernel's handler table directly; rank processes send them over their socket.
Nothing here imports the kernel (simfs/runtime) or the rank's side."""
