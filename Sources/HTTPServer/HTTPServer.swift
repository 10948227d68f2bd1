// HTTP/1.1 server: see HTTPServer.swift (issue 7).
