"""Alert delivery: the router that takes ``gpufleet.alert.v1`` events to Slack, PagerDuty, Alertmanager
and signed webhooks, routed, grouped, silenced and inhibited, once per (incident, status, receiver).

``routing.py`` reads the routing file, ``receivers/`` holds one module per kind of receiver,
``outbox.py`` is the durable delivery log, ``router.py`` decides what is owed and when, ``sender.py``
delivers (rate limits, retries, dead letters), ``service.py`` composes the process.
"""
