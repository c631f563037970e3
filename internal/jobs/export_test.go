package jobs

// EndWaiters returns how many readers wait for the job to end.
func EndWaiters(s *Service, jobID string) int {
	s.ends.mu.Lock()
	defer s.ends.mu.Unlock()
	return len(s.ends.waiters[jobID])
}
