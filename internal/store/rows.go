package store

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/fault"
)

// Every stored record type has a row type (its columns as read) and a
// method that turns a row into the record; these helpers run a query and
// apply that method, so that each type is read the same way by every
// query that reads it.

// getOne reads the row query selects and converts it; no row is the
// not-found error of what (“server”, “domain”).
func getOne[R, T any](ctx context.Context, q sqlx.QueryerContext, conv func(R) (T, error), what, query string, args ...any) (T, error) {
	var r R
	err := sqlx.GetContext(ctx, q, &r, query, args...)
	if notFound(err) {
		var zero T
		return zero, fault.NotFoundf("No such %s.", what)
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return conv(r)
}

// selectAll reads the rows query selects and converts each, in order.
func selectAll[R, T any](ctx context.Context, q sqlx.QueryerContext, conv func(R) (T, error), query string, args ...any) ([]T, error) {
	var rows []R
	if err := sqlx.SelectContext(ctx, q, &rows, query, args...); err != nil {
		return nil, err
	}
	out := make([]T, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = conv(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// always adapts a conversion that cannot fail to getOne and selectAll.
func always[R, T any](conv func(R) T) func(R) (T, error) {
	return func(r R) (T, error) { return conv(r), nil }
}

// asIs is the conversion of a value read as it is (a single column).
func asIs[T any](v T) (T, error) { return v, nil }
