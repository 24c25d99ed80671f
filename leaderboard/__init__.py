"""The LayerBench leaderboard: a read-only Streamlit app over the results database."""
