"""Reports: what tells what a run did. How a run ended, as facts (`ending`); report.json, decided in one place
for every ending, and report.md from it (`report`); report.html (`report_html`); the SVG charts and the
wrong-way check (`charts`); the verdict line and the predictions table (`verdict`)."""
