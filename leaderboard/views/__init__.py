"""The leaderboard pages: Streamlit page scripts run by leaderboard/app.py (not imported)."""
