"""Running as a systemd service: the sd_notify protocol and `vramscope service install`."""
