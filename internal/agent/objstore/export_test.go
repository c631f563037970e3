package objstore

// SetPageSize makes the store list this many files per page, so tests
// reach further pages with a few files.
func (d *Drive) SetPageSize(n int) { d.pageSize = n }
