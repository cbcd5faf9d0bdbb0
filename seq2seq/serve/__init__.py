"""`seq2seq serve`: the HTTP API and the page that shows attention."""
