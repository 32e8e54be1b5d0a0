"""Row converters, one module per data format: a decoded row (a dict) in, ``(Problem | None, issues)`` out.

A converter reads no file and knows no other format; ``codea1.data.sources`` decides which one
a file or a built-in name needs.
"""
