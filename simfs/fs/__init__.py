"""The filesystem model: servers (volatile layer + journal), node clients with their caches, mounts."""
