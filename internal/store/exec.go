package store

import (
	"database/sql"

	"github.com/capstan-dev/capstan/internal/fault"
)

// changedOne reports whether the statement that returned res and err
// changed exactly one row: the outcome of a conditional write of one
// record.
func changedOne(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// mustAffect turns a write of a record, given the statement's res and err,
// that changed no row into the not-found error of what (“user”, “domain”).
func mustAffect(res sql.Result, err error, what string) error {
	return unlessNone(res, err, fault.NotFoundf("No such %s.", what))
}

// unlessNone is the error of a statement given its res and err, none when
// it changed no row.
func unlessNone(res sql.Result, err error, none error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return none
	}
	return nil
}

// mustChange checks a write of one record conditional on what the caller
// read of it: when it changed no row, the record is gone (the error of
// found, which reads it) or changed since, which is conflict.
func mustChange(res sql.Result, err error, found func() error, conflict error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil || n > 0 {
		return err
	}
	if err := found(); err != nil {
		return err
	}
	return conflict
}
