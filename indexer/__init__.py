"""wikiground indexer: MediaWiki dumps and JSONL corpora into a DuckDB store and search indexes."""
