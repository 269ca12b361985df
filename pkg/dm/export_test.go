// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

// For the tests of package dm_test.
var (
	CanMknod  = canMknod
	CheckNode = checkNode
)

// SetBufferSize sets the first buffer size a Client offers for replies
// with data, so that tests in package dm_test can make replies overflow.
func SetBufferSize(c *Client, n int) { c.bufSize = n }

// EnableUdev makes a Client act as if udevd ran: resumes and removes carry
// a cookie and wait for it.
func EnableUdev(c *Client) { c.udev = func() bool { return true } }
