"""Classroom mode: one shared engine (a Batching Lab server), many students. Only page.py draws
(Streamlit); the rest is plain Python the page reads.

    board.py   what every viewer sees, built once per refresh for all of them: the tables,
               the shared figures, the per-tenant table, each tenant's cells in the batch chart
    feed.py    the app process's one reader of the server: viewers counted, refresh adapted
    names.py   a student's name, which becomes their tenant
    page.py    the Classroom page (url /classroom)
"""
