"""`servelab run`: start a server, benchmark it, check its accuracy, judge assertions, keep the results."""
