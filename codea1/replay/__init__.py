"""The Mistake Book: durable replay of tests that once broke code."""
