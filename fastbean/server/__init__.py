"""The server process on the event loop: listeners and connections
(protocol.py), the engine's timer, turns and signals (server.py), the busy
poller, systemd, and the HTTP endpoint (http.py) with its metrics text."""
