//! Fetching serving graphs over bearer-authenticated HTTPS.
