package gateway

// truncate shortens s to n bytes for a message, marking the cut.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
