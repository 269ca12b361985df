// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidecache/tidecache/pkg/placement"
	"github.com/tidecache/tidecache/pkg/store"
)

// Sentinel errors of the services. Methods wrap them with what went wrong;
// statusOf turns them into the gRPC codes the CSI specification asks for.
var (
	// errInvalid: a required field is missing or a value is not accepted
	// (InvalidArgument).
	errInvalid = errors.New("invalid argument")
	// errNotFound: the volume, or the path given for it, does not exist
	// (NotFound).
	errNotFound = errors.New("not found")
	// errExists: a volume of that name exists and differs from the
	// request, or a path is already used differently (AlreadyExists).
	errExists = errors.New("already exists and is incompatible")
	// errOutOfRange: the capacity range cannot be met (OutOfRange).
	errOutOfRange = errors.New("capacity out of range")
	// errNoRoom: no node allowed by the topology has room
	// (ResourceExhausted).
	errNoRoom = errors.New("no room")
	// errPrecondition: the volume is not in a state the call needs, such
	// as publishing a volume that is not staged (FailedPrecondition).
	errPrecondition = errors.New("failed precondition")
)

// errorf wraps sentinel with a message that reads naturally: the
// sentinel's text does not appear, errors.Is still finds it.
func errorf(sentinel error, format string, a ...any) error {
	return &codedError{sentinel, fmt.Errorf(format, a...)}
}

type codedError struct {
	sentinel error
	err      error
}

func (e *codedError) Error() string   { return e.err.Error() }
func (e *codedError) Unwrap() []error { return []error{e.sentinel, e.err} }

// codeOf is the one place where errors become gRPC codes.
func codeOf(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, errInvalid):
		return codes.InvalidArgument
	case errors.Is(err, errNotFound), errors.Is(err, store.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, errExists):
		return codes.AlreadyExists
	case errors.Is(err, errOutOfRange):
		return codes.OutOfRange
	case errors.Is(err, errNoRoom), errors.Is(err, placement.ErrNoCapacity):
		return codes.ResourceExhausted
	case errors.Is(err, errPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, store.ErrConflict):
		// Someone changed the record between our read and write: the CO
		// retries the call, which reads again.
		return codes.Aborted
	case errors.Is(err, store.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// statusOf returns err as a gRPC status error with the code codeOf
// chooses. Only an error that is itself a status (grpc's own, such as a
// request the server could not decode) keeps its code: a status wrapped
// deeper, say an etcd client error inside a store error, is the store's
// to classify.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}
