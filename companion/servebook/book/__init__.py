"""What only the book needs: its scenarios, its formatting, its cached experiments, figures and widgets.

Chapters, exercise pages, figures, widgets and tests read every reused
scenario from here, so a scenario (a server, a trace, a workload) is set up
in one place.  Nothing below this layer imports it.
"""
