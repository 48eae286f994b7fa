"""Running as a systemd service: `vramscope service install/uninstall`
(the sd_notify protocol is daemon/sd_notify.py)."""
