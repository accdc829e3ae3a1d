"""Command-line tools of paddle_ngraph (``paddle-ngraph-dump``)."""
