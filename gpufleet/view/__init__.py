"""The operator's view: the fleet page and its JSON (``gpufleet serve``), the report (``gpufleet report``) and the
live terminal view (``gpufleet top``), all over the same reads of the store.

- ``data.py``: the queries, each returning plain JSON-ready values (the JSON endpoints serve them as they are);
- ``charts.py`` (and ``png.py``): the charts, drawn on the server as inline SVG, no script or network needed;
- ``sections.py``: each section of the page and the report, a chart or the reason it is empty, and its table;
- ``pages.py``: the HTML documents (fleet page, incident page, report), self-contained;
- ``routes.py``: the routes mounted on ``gpufleet serve``'s router;
- ``top.py``: the terminal view (curses).
"""
