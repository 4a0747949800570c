"""The run report: a verified bundle or sealed run as one self-contained HTML page.

`repro report`, `repro launch` and `repro demo` write it. The package keeps its layers apart:
`model` is the typed report (what a page and `--json` show), `compute` the pure functions from
verified evidence to that model, `differences` what differs between two locks by section (shared
with `repro diff`), `gather` the only reading (verify first, then the sealed files), `charts` the
figures (matplotlib, imported only when a report is drawn) and `page` the HTML; `write` puts a
report on disk.
"""
