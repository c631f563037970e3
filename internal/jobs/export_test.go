package jobs

// EndWaiters returns how many readers wait for the job to end.
func EndWaiters(s *Service, jobID string) int {
	s.ends.mu.Lock()
	defer s.ends.mu.Unlock()
	return len(s.ends.waiters[jobID])
}

// ClaimWaiters returns how many claims wait for a job of the server.
func ClaimWaiters(s *Service, serverID string) int {
	s.wake.mu.Lock()
	defer s.wake.mu.Unlock()
	return len(s.wake.waiters[serverID])
}
