"""Live MediaWiki Action API fallback for entities the local index lacks, with record/replay cache."""
