package store

import "strings"

// conds are the conditions of a list query, with their arguments in
// order: each filter the caller gave adds one.
type conds struct {
	sql  []string
	args []any
}

// add adds a condition and the arguments of its placeholders.
func (c *conds) add(cond string, args ...any) {
	c.sql = append(c.sql, cond)
	c.args = append(c.args, args...)
}

// equal adds column = v when v is given (not empty).
func (c *conds) equal(column, v string) {
	if v != "" {
		c.add(column+" = ?", v)
	}
}

// where is the conditions joined by AND; with none, 1 = 1.
func (c *conds) where() string {
	if len(c.sql) == 0 {
		return "1 = 1"
	}
	return strings.Join(c.sql, " AND ")
}
