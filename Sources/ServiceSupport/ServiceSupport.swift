// systemd notify and JSON logging (issue 7).
