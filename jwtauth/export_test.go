package jwtauth

// WaitForRefresh waits for the fetch of a's key set in flight, if any.
func WaitForRefresh(a *Authenticator) {
	a.keys.mu.Lock()
	c := a.keys.inflight
	a.keys.mu.Unlock()
	if c != nil {
		<-c.done
	}
}
