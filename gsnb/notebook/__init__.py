"""Notebook layer: IPython magics, the training panel and plotly figures."""
