"""The egress proxy: what a session of an `allowlist` environment may send out, decided outside it.

A real proxy engine (mitmproxy) runs one addon; the decisions are plain Python that imports
neither mitmproxy nor anything but Common, so they are unit-tested in the project's own venv:

    checks.py       host names, IP literals, userinfo, resolved addresses, header sizes (pure)
    packages.py     which package-index paths a policy's `packages` allow (pure)
    credentials.py  the session's proxy credential: parse, verify, bind (pure)
    scrub.py        a secret's value and its encodings out of a response (pure)
    caches.py       asyncio TTL caches with one load per key at a time
    store.py        the data access: DynamoDB, SSM, Secrets Manager, CodeArtifact (boto3, blocking)
    engine.py       the decisions for one connection or request, the counters and the breakers,
                    with every blocking read run off the event loop (asyncio.to_thread)
    config.py       the proxy's settings (command line)
    addon.py        the mitmproxy hooks: thin, each asks the engine and applies its answer
    __main__.py     `python -m egress_proxy ...`: mitmproxy with the addon, as the local stack and
                    the stage's container run it

It runs under its own virtual environment (`.venv-egress`, Python >= 3.12, pinned in
functions/egress_proxy/requirements.txt) and imports Common and the proxy engine only: never a
Lambda, the local stack, the CLI or the client (docs/egress.md).
"""
