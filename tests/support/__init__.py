"""Test and benchmark helpers: a fake MediaWiki server, a fake clock, vector checks. Not shipped."""
