"""Index backends, one module each, behind the ``search(query, k) -> list[Hit]`` protocol."""
