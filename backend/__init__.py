"""Credit Lens engine: store, importers, estimators, channels, models. Never imports Streamlit."""
