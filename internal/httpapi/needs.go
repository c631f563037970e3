package httpapi

import "context"

// needs runs h only when ready finds the service h uses: a server built
// without it (the OpenAPI command, a test) answers ready's error instead.
func needs[I, O any](ready func() error, h func(context.Context, *I) (*O, error)) func(context.Context, *I) (*O, error) {
	return func(ctx context.Context, in *I) (*O, error) {
		if err := ready(); err != nil {
			return nil, err
		}
		return h(ctx, in)
	}
}

// present is nil when a service is set, else missing.
func present(set bool, missing error) error {
	if set {
		return nil
	}
	return missing
}

func (s *Server) hasApps() error        { return present(s.deps.Apps != nil, errNoApps) }
func (s *Server) hasBackups() error     { return present(s.deps.Backups != nil, errNoBackups) }
func (s *Server) hasChannels() error    { return present(s.deps.Channels != nil, errNoNotify) }
func (s *Server) hasDatabases() error   { return present(s.deps.Databases != nil, errNoDatabases) }
func (s *Server) hasDomains() error     { return present(s.deps.Domains != nil, errNoDomains) }
func (s *Server) hasEvents() error      { return present(s.deps.Events != nil, errNoEvents) }
func (s *Server) hasGitHost() error     { return present(s.deps.GitHost != nil, errNoGitHost) }
func (s *Server) hasInbox() error       { return present(s.deps.Inbox != nil, errNoNotify) }
func (s *Server) hasMetrics() error     { return present(s.deps.Metrics != nil, errNoMetrics) }
func (s *Server) hasMonitoring() error  { return present(s.deps.Monitoring != nil, errNoMonitoring) }
func (s *Server) hasPreferences() error { return present(s.deps.Preferences != nil, errNoNotify) }
