"""The boundary ``run_command`` runs in: bubblewrap namespaces, a container, or (only when
the operator says so) none. See ``base`` for the port and ``choose`` for how one is picked."""
