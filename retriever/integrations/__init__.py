"""Library integrations, each an optional extra: ``retriever.integrations.dspy`` (``pip install wikiground[dspy]``)
and ``retriever.integrations.langchain`` (``wikiground[langchain]``). Each searches an in-process
:class:`~retriever.api.Retriever` or a running server (``python -m retriever.serve``) by its URL; the library it
plugs into is imported only by its own module.
"""
