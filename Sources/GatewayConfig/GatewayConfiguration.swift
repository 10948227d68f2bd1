// Gateway configuration (issue 7).
